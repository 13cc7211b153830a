"""Tests of the aggregator service, against real uvicorn servers on loopback."""
