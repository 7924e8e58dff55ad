"""The CEC windowed aggregate operator (docs/ARCHITECTURE.md §3–4).

``ReferenceOperator`` is the per-tuple oracle, ``VectorOperator`` the batch
implementation production uses; both take an :class:`OperatorConfig` and follow the
semantics in :mod:`cec.operator.base`.

The modules: ``base`` (the interface, its semantics, the config), ``reference`` (the
oracle), ``vector`` (the production shell), one kernel per window kind behind
``kernel``'s protocol (``count_tumbling``, ``count_sliding``, ``time_windows``,
``sessions``); what they share: ``rows`` (output rows, seqs, ``N``, ``G_open``
footprints), ``background`` (the ``G_check`` step), ``ec_io`` (EC load, reconstruction,
dump), ``state`` (the value-comparable state dump), ``memory`` (the open windows'
memory check); the vector operator's stores: ``arrays`` (numpy types, growth),
``key_registry`` (keys to dense indices; ``int_hash``, its table of hashed int keys),
``key_index`` (each key's open windows), ``slot_layout`` and ``slots`` (the open
windows' arrays), ``footprint_order`` (the open windows by footprint).
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
