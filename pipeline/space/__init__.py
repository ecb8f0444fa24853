"""The case space: geometries, the sweep's categories, the cases (with their expected failures), their data, shards."""
