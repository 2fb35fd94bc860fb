"""Several workers, a three-node cluster and faults: scale-out, members joining
and leaving, crashes, outages and broker faults."""
