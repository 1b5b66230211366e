"""Text helpers every stage shares: reading clocks (``clock``), rank and launcher prefixes (``prefix``),
templates for grouping (``mask``), GPU ids (``gpuid``) and secret redaction (``redact``). Pure functions on
strings; no I/O."""
