"""Result storage: hive-partitioned Parquet under a local or S3 root."""
