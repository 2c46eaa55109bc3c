"""Text processing: tokenizer (trained on redacted text only), redaction, alignment, dedup."""
