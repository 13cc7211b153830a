"""End-to-end: real aggregator and peers on loopback complete a problem; the CLI drives them."""
