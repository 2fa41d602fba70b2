"""The GPU check: one prepared run that proves bertkit's CUDA path correct and fast against
transformers, within one call of the device tool (docs/gpu.md, "Running the GPU check").

``python -m benchmarks.gpu_check`` (``scripts/gpu_check.sh``) is the driver (``__main__``): it
runs each stage as a subprocess with its own time cap and writes the summary. The stages:

0. ``data``: shards of the built-in corpus prepared by bertkit's own pipeline;
1. ``correctness``: the ``gpu``-marked tests on CUDA, through pytest and its junit XML;
2. ``pretrain_speed``: pre-training steps, bertkit against transformers, and the host
   synchronisations of bertkit's update counted with torch.profiler;
3. ``task_speed``: a classification fine-tuning step and embedding throughput;
4. ``pretrain_run``: a short real ``bertkit pretrain`` run whose held-out loss must fall;
5. ``glue`` (``--stage5``, a session of its own): a longer pre-training on a given corpus, then
   ``bertkit finetune glue`` on SST-2 and MRPC.

``--dry-run`` runs all of it on the CPU with tiny sizes (``tests/test_gpu_check_dry_run.py``).
"""
