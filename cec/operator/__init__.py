"""The CEC windowed aggregate operator (docs/ARCHITECTURE.md §3–4).

``ReferenceOperator`` is the per-tuple oracle, ``VectorOperator`` the batch
implementation production uses; both take an :class:`OperatorConfig` and follow the
semantics in :mod:`cec.operator.base`.
"""

from cec.operator.base import AggregateOperator, OperatorConfig
from cec.operator.reference import ReferenceOperator
from cec.operator.state import OperatorState, WindowSnapshot, ec_from_output
from cec.operator.vector import VectorOperator

__all__ = [
    "AggregateOperator",
    "OperatorConfig",
    "OperatorState",
    "ReferenceOperator",
    "VectorOperator",
    "WindowSnapshot",
    "ec_from_output",
]
