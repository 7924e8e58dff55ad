"""Example pipeline specs and their data, shipped as package data (`cec examples`)."""
