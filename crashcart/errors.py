"""The one exception tree of CrashCart. Exceptions carry context, never user-facing prose.

::

    CrashCartError                 base; .stage and .incident_id are attached as it propagates
    ├── BundleError                the input is unusable (the user can fix it) -> CLI exit 2
    │   ├── BundleNotFound         the path does not exist
    │   ├── BundleTooLarge         a size, file-count or compression-ratio cap was hit
    │   ├── UnsafeBundlePath       absolute path, "..", link or device inside an archive
    │   ├── CorruptBundle          truncated or malformed archive
    │   ├── EmptyBundle            nothing in it
    │   └── NoLogsFound            files, but none we can analyse
    ├── VerificationFailed         no claim survived citation checks (fail closed)
    ├── StoreError                 sqlite problems, wrapped with the operation
    │   └── IncidentNotFound       no stored incident with that id
    ├── RunbookError               a runbook action was refused (e.g. the plan changed)
    ├── ConfigError                a setting is missing or malformed (the detail names it) -> CLI exit 2
    ├── ClusterError               the Ray cluster could not run the scan (a task failed after its retries)
    │   ├── ClusterUnavailable     Ray is not installed, or the cluster cannot be reached -> CLI exit 2
    │   └── BundleNotVisible       a Ray worker cannot read the bundle (the detail names path and node) -> exit 2
    └── ModelError                 a model call gave nothing usable; the LLM engine degrades, never raises it
        ├── ModelCallFailed        no valid answer after retries and one repair (.unavailable: endpoint down)
        └── BudgetExhausted        the incident's token or cost budget would be exceeded
"""

from __future__ import annotations


class CrashCartError(Exception):
    """Base of every error CrashCart raises on purpose."""

    def __init__(self, detail: str = "", *, stage: str | None = None, incident_id: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.stage = stage
        self.incident_id = incident_id


class BundleError(CrashCartError):
    """The bundle cannot be used as given; the detail says what to fix."""


class BundleNotFound(BundleError):
    pass


class BundleTooLarge(BundleError):
    pass


class UnsafeBundlePath(BundleError):
    pass


class CorruptBundle(BundleError):
    pass


class EmptyBundle(BundleError):
    pass


class NoLogsFound(BundleError):
    pass


class VerificationFailed(CrashCartError):
    pass


class StoreError(CrashCartError):
    pass


class IncidentNotFound(StoreError):
    pass


class RunbookError(CrashCartError):
    pass


class ConfigError(CrashCartError):
    """A setting is missing or malformed; the detail names the variable and what to set."""


class ClusterError(CrashCartError):
    """The scan could not run on the Ray cluster (``scan.cluster``); never a silent local fall-back."""


class ClusterUnavailable(ClusterError):
    """Ray is not installed, or the cluster named by ``--cluster``/``CRASHCART_RAY_ADDRESS`` cannot be reached."""


class BundleNotVisible(ClusterError):
    """A Ray worker cannot read the bundle's directory; the detail names the path and the node."""


class ModelError(CrashCartError):
    """A model call gave nothing usable. Handled inside the LLM engine (scan failure, partial, fallback)."""


class ModelCallFailed(ModelError):
    """No usable answer after retries and one repair; ``unavailable`` when the endpoint kept failing."""

    def __init__(self, detail: str, *, unavailable: bool = False) -> None:
        super().__init__(detail)
        self.reason = detail
        self.unavailable = unavailable


class BudgetExhausted(ModelError):
    """The incident's token or cost budget would be exceeded by the next call."""
