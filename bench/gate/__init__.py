"""Gate mode: what the gate adds to a record's way (latency), the approved rate
under a judge of random latency with key order kept, and the copies a kill
leaves, with and without ``gate_transactional``."""
