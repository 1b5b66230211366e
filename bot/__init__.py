"""CrashCart's Slack bot: bundles and job ids in, a threaded diagnosis and an approval workflow out.

Built on slack-bolt's ``AsyncApp`` and the core's public API only (``crashcart.__all__``). Modules:
``app`` (listeners, ack first), ``queue`` (durable SQLite jobs and dedupe), ``worker`` (runs jobs),
``analysis`` (one analysis in a child process), ``intake`` (files.info, download, job-id lookup),
``lookups`` (status/lookup/list for a channel), ``blocks`` (Block Kit within Slack's limits),
``approvers`` (who may decide), ``messages`` (every sentence users read), ``main`` (entry point).
"""
