"""BERT WordPiece tokenization (Hugging Face BertTokenizerFast semantics) and vocab training."""

from bertkit.tokenizer.batch import TokenArrays
from bertkit.tokenizer.encoding import Encoding
from bertkit.tokenizer.protocol import Tokenizer
from bertkit.tokenizer.tokenizer import VERY_LARGE_INTEGER, BertTokenizer
from bertkit.tokenizer.trainer import train_wordpiece
from bertkit.tokenizer.wordpiece import Vocab

__all__ = [
    "VERY_LARGE_INTEGER",
    "BertTokenizer",
    "Encoding",
    "TokenArrays",
    "Tokenizer",
    "Vocab",
    "train_wordpiece",
]
