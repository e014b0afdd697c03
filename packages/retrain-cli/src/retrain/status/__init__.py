"""Run status: scanning log roots, rendering tables and curves, and the Prometheus exporter."""
