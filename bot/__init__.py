"""CrashCart's Slack bot: bundles and job ids in, a threaded diagnosis and an approval workflow out.

Built on slack-bolt's ``AsyncApp`` and the core's public API only (``crashcart.__all__``). Modules:
``app`` (listeners, ack first), ``decisions`` (runbook buttons, Re-run), ``access`` (channels, guests,
other workspaces), ``queue`` (durable SQLite jobs and dedupe), ``worker`` (runs jobs), ``status`` (the
status line), ``analysis`` (one analysis in a child process), ``intake`` (files.info, download, job-id
lookup), ``lookups`` (status/lookup/list for a channel), ``home`` (the App Home tab), ``blocks`` (Block
Kit within Slack's limits), ``mrkdwn`` (the one escaping function, mentions, dates, links),
``approvers`` (who may decide), ``messages`` (every sentence users read), ``main`` (entry point).
"""
