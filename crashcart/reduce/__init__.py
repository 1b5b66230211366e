"""Reduce: decide the root cause and explain the rest as symptoms.

``reduce_offline`` is the deterministic causal scorer (``offline``) over the grouped findings: class role
and severity, earliness on a common clock, specificity, corroboration, and the rules of TAXONOMY §1, with
the candidates scored by ``causal``. The LLM engine's reduce is given its answer (``crashcart.engine``).
"""

from crashcart.reduce.offline import reduce_offline

__all__ = ["reduce_offline"]
