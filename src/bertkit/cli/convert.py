"""``bertkit convert``: Google's original BERT TensorFlow checkpoint -> a model folder.

    bertkit convert --tf-checkpoint uncased_L-12_H-768_A-12/bert_model.ckpt --output bert-base

Reads ``bert_model.ckpt.{index,data-*}`` without TensorFlow and writes a BertForPreTraining
folder (config.json, model.safetensors and the tokenizer's files) that bertkit and transformers
load. The flags are the fields of :class:`bertkit.interop.tf_convert.TfConvertSettings`; the
library function is ``convert_tf_checkpoint``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit.cli import options

HELP = "convert Google's original BERT TensorFlow checkpoint (bert_model.ckpt) to a model folder"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.interop.tf_convert import TfConvertSettings

    p.add_argument(
        "--tf-checkpoint",
        type=Path,
        required=True,
        metavar="PREFIX",
        help="the checkpoint prefix (.../bert_model.ckpt) or the folder holding "
        "bert_model.ckpt.index",
    )
    p.add_argument("--output", type=Path, required=True, help="the model folder to write")
    options.add_fields(p, TfConvertSettings, ("config", "vocab", "hidden_act"))
    options.add_overwrite(p)  # read back into TfConvertSettings.overwrite
    case = p.add_mutually_exclusive_group()
    text = options.field_docs(TfConvertSettings)["do_lower_case"]
    case.add_argument(
        "--do-lower-case", dest="do_lower_case", action="store_true", default=None, help=text
    )
    case.add_argument(
        "--cased",
        dest="do_lower_case",
        action="store_false",
        help="keep case and accents (the opposite of --do-lower-case)",
    )


def run(args: argparse.Namespace) -> int:
    from bertkit.interop.tf_convert import TfConvertSettings, convert_tf_checkpoint

    settings = options.values(args, TfConvertSettings)
    result = convert_tf_checkpoint(args.tf_checkpoint, args.output, settings)
    for line in result.summary():
        print(f"bertkit convert: {line}", file=sys.stderr)
    return 0
