"""Write tests/fixtures/tf_bert and tests/fixtures/tf_misc with real TensorFlow, once.

bertkit reads Google's TensorFlow checkpoints without TensorFlow (bertkit/interop/tf_checkpoint.py);
these fixtures are what the tests hold that reader to, so they must come from TensorFlow itself.
TensorFlow is never a bertkit dependency: run this in a throwaway environment.

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu numpy
    /tmp/tfvenv/bin/python scripts/make_tf_checkpoint_fixture.py

tf_bert/   a tiny BERT (H=32, L=2, A=4, I=64, V=100, P=64) under Google's exact variable names, with
           AdamWeightDecayOptimizer's slots (NAME/adam_m, NAME/adam_v) and global_step, saved by
           tf.compat.v1.train.Saver as run_pretraining.py does: bert_model.ckpt.{index,data-*},
           bert_config.json, vocab.txt.
tf_misc/   the same Saver, sharded over two (logical) CPUs: every dtype the reader maps, a scalar,
           a string tensor (unsupported) and a partitioned variable (saved as slices).
Each folder has expected.json: for every variable, TensorFlow's own reading of it
(tf.train.load_checkpoint): dtype, shape, sha256 of its little-endian bytes (bfloat16 widened to
float32, as bertkit returns it), and the first values.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "type_vocab_size": 2,
    "vocab_size": 100,
}
WORDS = (
    "the a an of and to in is was on at it he she they his her cat dog sat mat ran park man woman "
    "city paris france london capital river house book read wrote born year music album released "
    "king queen war old new big small good first last time day . , ! ? ' - ( ) : ; 0 1 2 3"
)
PIECES = "##s ##ed ##ing ##er ##ly ##est ##ion ##al ##ic ##y ##e ##a ##o ##i ##n ##t"


def vocab() -> list[str]:
    """Google's layout: [PAD], [unusedN], [UNK], [CLS], [SEP], [MASK], then words and pieces."""
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(4)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += WORDS.split() + PIECES.split()
    tokens += [f"[unused{i}]" for i in range(4, 4 + CONFIG["vocab_size"] - len(tokens))]
    assert len(tokens) == CONFIG["vocab_size"]
    return tokens


def bert_variables(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Google's variable names (modeling.py, run_pretraining.py) -> float32 values.

    Values are far from an initialisation (gamma != 1, beta and biases != 0) so that any swapped
    or untransposed tensor changes the outputs the tests compare."""
    h, i, v = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"]

    def dense(name: str, n_in: int, n_out: int) -> dict[str, np.ndarray]:
        return {f"{name}/kernel": rng.normal(0, 0.2, (n_in, n_out)), f"{name}/bias": bias(n_out)}

    def bias(n: int) -> np.ndarray:
        return rng.normal(0, 0.1, n)

    def norm(name: str) -> dict[str, np.ndarray]:
        return {f"{name}/LayerNorm/gamma": 1 + bias(h), f"{name}/LayerNorm/beta": bias(h)}

    out = {
        "bert/embeddings/word_embeddings": rng.normal(0, 0.5, (v, h)),
        "bert/embeddings/token_type_embeddings": rng.normal(0, 0.5, (CONFIG["type_vocab_size"], h)),
        "bert/embeddings/position_embeddings": rng.normal(
            0, 0.5, (CONFIG["max_position_embeddings"], h)
        ),
        **norm("bert/embeddings"),
    }
    for n in range(CONFIG["num_hidden_layers"]):
        layer = f"bert/encoder/layer_{n}"
        for part in ("query", "key", "value"):
            out.update(dense(f"{layer}/attention/self/{part}", h, h))
        out.update(dense(f"{layer}/attention/output/dense", h, h))
        out.update(norm(f"{layer}/attention/output"))
        out.update(dense(f"{layer}/intermediate/dense", h, i))
        out.update(dense(f"{layer}/output/dense", i, h))
        out.update(norm(f"{layer}/output"))
    out.update(dense("bert/pooler/dense", h, h))
    out.update(dense("cls/predictions/transform/dense", h, h))
    out.update(norm("cls/predictions/transform"))
    out["cls/predictions/output_bias"] = bias(v)
    out["cls/seq_relationship/output_weights"] = rng.normal(0, 0.2, (2, h))
    out["cls/seq_relationship/output_bias"] = bias(2)
    return {k: np.asarray(a, np.float32) for k, a in out.items()}


def save(values: dict[str, tuple[np.ndarray, object, str]], prefix: Path, cpus: int) -> None:
    """Save ``{name: (value, tf dtype, device)}`` with tf.compat.v1.train.Saver at ``prefix``."""
    graph = tf.Graph()
    with graph.as_default():
        for name, (value, dtype, device) in values.items():
            with tf.device(device):
                tf.compat.v1.get_variable(
                    name, initializer=tf.constant(value, dtype=dtype), use_resource=False
                )
        saver = tf.compat.v1.train.Saver(sharded=cpus > 1)
        config = tf.compat.v1.ConfigProto(device_count={"CPU": cpus})
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(prefix), write_meta_graph=False, write_state=False)


def expected(prefix: Path) -> dict[str, dict]:
    """TensorFlow's own reading of every variable: dtype, shape, sha256, first values."""
    reader = tf.train.load_checkpoint(str(prefix))
    out = {}
    for name, dtype in sorted(reader.get_variable_to_dtype_map().items()):
        if dtype == tf.string:
            out[name] = {"dtype": "string"}
            continue
        value = reader.get_tensor(name)
        if dtype == tf.bfloat16:
            value = value.astype(np.float32)
        flat = np.ascontiguousarray(value).reshape(-1)
        little = flat.astype(flat.dtype.newbyteorder("<")).tobytes()
        out[name] = {
            "dtype": dtype.name,
            "shape": list(value.shape),
            "sha256": hashlib.sha256(little).hexdigest(),
            "first": [v.item() for v in flat[:3]],
        }
    return out


def fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def make_bert() -> None:
    folder = fresh(FIXTURES / "tf_bert")
    rng = np.random.default_rng(0)
    model = bert_variables(rng)
    values = {k: (a, tf.float32, "/cpu:0") for k, a in model.items()}
    for name, a in model.items():  # optimization.py: param_name + "/adam_m", "/adam_v"
        m = rng.normal(0, 1e-3, a.shape).astype(np.float32)
        v = np.abs(rng.normal(0, 1e-6, a.shape)).astype(np.float32)
        values[f"{name}/adam_m"] = (m, tf.float32, "/cpu:0")
        values[f"{name}/adam_v"] = (v, tf.float32, "/cpu:0")
    values["global_step"] = (np.int64(1000), tf.int64, "/cpu:0")
    save(values, folder / "bert_model.ckpt", cpus=1)
    (folder / "bert_config.json").write_text(json.dumps(CONFIG, indent=2, sort_keys=True) + "\n")
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in vocab()), encoding="utf-8")
    write_expected(folder, "bert_model.ckpt")


def make_misc() -> None:
    folder = fresh(FIXTURES / "tf_misc")
    rng = np.random.default_rng(1)
    a = rng.normal(0, 3, (3, 4))
    values = {
        "dtypes/f32": (a.astype(np.float32), tf.float32, "/cpu:0"),
        "dtypes/f16": (a.astype(np.float16), tf.float16, "/cpu:1"),
        "dtypes/bf16": (a.astype(np.float32), tf.bfloat16, "/cpu:0"),
        "dtypes/f64": (a, tf.float64, "/cpu:1"),
        "dtypes/i32": (rng.integers(-(2**31), 2**31, (2, 3)).astype(np.int32), tf.int32, "/cpu:0"),
        "dtypes/i64": (rng.integers(-(2**62), 2**62, (5,)), tf.int64, "/cpu:1"),
        "dtypes/i8": (rng.integers(-128, 128, (4,)).astype(np.int8), tf.int8, "/cpu:0"),
        "dtypes/u8": (rng.integers(0, 256, (4,)).astype(np.uint8), tf.uint8, "/cpu:1"),
        "dtypes/bool": (np.array([True, False, True]), tf.bool, "/cpu:0"),
        "dtypes/scalar": (np.float32(2.5), tf.float32, "/cpu:1"),
        "dtypes/empty": (np.zeros((0, 3), np.float32), tf.float32, "/cpu:0"),
        "dtypes/string": (np.array([b"ab", b"c"]), tf.string, "/cpu:1"),
    }
    save(values, folder / "model.ckpt", cpus=2)
    # A partitioned variable: Saver writes its two slices under encoded keys.
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.get_variable(
            "partitioned",
            initializer=tf.constant(a.astype(np.float32)),
            partitioner=tf.compat.v1.fixed_size_partitioner(2),
            use_resource=False,
        )
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(folder / "sliced.ckpt"), write_meta_graph=False, write_state=False)
    write_expected(folder, "model.ckpt")


def write_expected(folder: Path, name: str) -> None:
    """expected.json, one variable a line."""
    found = expected(folder / name)
    rows = [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in found.items()]
    (folder / "expected.json").write_text("{\n" + ",\n".join(rows) + "\n}\n")


def main() -> None:
    tf.compat.v1.disable_eager_execution()
    make_bert()
    make_misc()
    for folder in ("tf_bert", "tf_misc"):
        files = sorted((FIXTURES / folder).iterdir())
        print(folder, sum(f.stat().st_size for f in files), "bytes:", [f.name for f in files])


if __name__ == "__main__":
    main()
