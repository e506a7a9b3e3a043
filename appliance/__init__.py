"""appliance: a JetStream-clustering NATS server (see DESIGN.md in shared/)."""

__version__ = "0.1.0"

# The NATS server version we speak for. Clients gate features on it (nats-py parses it as semver;
# CONSUMER.CREATE with a filter needs >= 2.9.0, KV >= 2.6.2), so it names the wire we implement.
NATS_VERSION = "2.15.1"
NATS_PROTO = 1
