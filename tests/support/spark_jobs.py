"""The start of a Spark job script in local mode on loopback, with the jetstream data source
registered: what the tests that run a job in a Python of their own (a NatsUser's creds, the slim
package in a clean environment) put before their reads."""

LOCAL_SESSION = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
from pyspark.sql import SparkSession
from jetstream_spark import register
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.pyspark.python", sys.executable)
    .getOrCreate()
)
register(spark)
"""
