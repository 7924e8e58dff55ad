"""``spark.read.format("cec")`` with no register call: Spark's discovery of cec's data source.

Spark 4 finds Python data sources by itself (SPARK-45917): the first time a session
needs a data source it starts a Python worker
(``pyspark.sql.worker.lookup_data_sources``) that imports every top-level module on
that Python's path whose name starts with ``pyspark_`` and registers the
``DefaultSource`` it defines (a :class:`pyspark.sql.datasource.DataSource`) under
``DefaultSource.name()``. This package is that module for cec: ``DefaultSource`` is
:class:`cec_spark.read.datasource.CecDataSource`, named ``"cec"``, so after ``pip
install cec`` ::

    spark.read.format("cec").load("runs/items")

works in any session whose Python (``PYSPARK_PYTHON`` / ``spark.pyspark.python``) has
cec installed. ``cec_spark.read.datasource.register(spark)`` still registers the same
class explicitly (the way for a Python that cannot see this package, e.g. cec imported
from a checkout that is not installed).

The package is the top layer (``tests/test_layers.py``): nothing imports it.
"""

from __future__ import annotations

from cec_spark.read.datasource import CecDataSource as DefaultSource

__all__ = ["DefaultSource"]
