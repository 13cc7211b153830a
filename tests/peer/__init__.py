"""Tests of the peer daemon: policy, relay, participation, against real servers on loopback."""
