"""Text to token ids with a model's own tokenizer, from local files only (no hub access)."""

from __future__ import annotations

from pathlib import Path

from emmy.diagnostics import EmmyError


def tokenize(model: str, text: str):
    """`[1, T]` int64 token ids for `text`. `model` must be a local Hugging Face directory that
    holds tokenizer files (tokenizer.json or tokenizer_config.json)."""
    path = Path(model)
    if not path.is_dir() or not any((path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
        raise EmmyError(
            f"--text needs the model's tokenizer: '{model}' is not a local model directory with "
            "tokenizer.json or tokenizer_config.json",
            hint="pass token ids with --input-ids instead",
        )
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        ids = tok(text, return_tensors="pt")["input_ids"]
    except Exception as e:  # a broken or unsupported tokenizer file
        raise EmmyError(f"cannot tokenize with the tokenizer in '{model}': {e}") from None
    if ids.shape[1] == 0:
        raise EmmyError("--text: the text has no tokens")
    return ids
