"""Report stage: diagnosis document, terminal rendering (postmortem, runbook and timeline come later)."""
