#!/bin/sh
# Spark 4 needs Java 17 or newer; say so plainly instead of letting the JVM fail later.
if ! command -v java >/dev/null 2>&1; then
    echo "cec: Java 17 or newer is required by Spark 4, but 'java' is not on PATH." >&2
    echo "     Install a JDK (e.g. 'apt-get install openjdk-17-jre-headless') and retry." >&2
    exit 1
fi
ver=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
if [ -z "$ver" ] || [ "$ver" -lt 17 ]; then
    echo "cec: Java 17 or newer is required by Spark 4, found: $(java -version 2>&1 | head -n 1)" >&2
    exit 1
fi
