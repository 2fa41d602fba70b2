"""Recipes: applications built from the library, called by the CLI and the benchmarks alike.

- :func:`run_quickstart` (``quickstart.py``): raw text to a pre-trained tiny BERT in minutes; its
  measured recipe and options in ``quickstart_settings.py``, the calibration and step planner in
  ``quickstart_plan.py``, the targets and the verdict in ``quickstart_verdict.py``.
- :func:`run_finetune` (``finetune.py``): a checkpoint fine-tuned on a task with the selection
  over learning rates x restarts, the selected model and metrics.json in the output folder; what a
  sentence-transformers start folder brings to it (settings, Dense modules, prompts) in
  ``finetune_folder.py``.

A recipe may import every room below it (training, inference, export, tasks, ...), never serve
or cli; ``bertkit quickstart`` and ``bertkit finetune`` are thin layers over these.
"""
