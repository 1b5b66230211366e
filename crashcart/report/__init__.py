"""Report: the ``diagnosis.json`` document (``document``, the stage's verb ``build_document``) and what a
person reads: the terminal view (``terminal``), the postmortem draft (``postmortem``) and the timeline
picture (``timeline``). The runbook's rendering is in ``crashcart.runbook``."""

from crashcart.report.document import RunFacts, build_document

__all__ = ["RunFacts", "build_document"]
