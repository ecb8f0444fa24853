"""The model frontends: tf.keras -> .tflite, torch -> .onnx, and their import to MLIR."""
