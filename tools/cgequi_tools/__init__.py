"""Python side of cgequi: exporters (PyTorch model -> HDF5) and reference-fixture helpers."""
EXPORTER_VERSION = "0.1.0"
FORMAT_VERSION = 1
