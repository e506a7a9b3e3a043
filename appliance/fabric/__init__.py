"""appliance.fabric: moving frames between the workers of one host.

- frames.py      frame kinds (append-only), the record format, RingSpace (the ring's arithmetic)
- link.py        the Link contract every local link keeps (try_send / receive / start / close)
- ring.py        RingLink: SPSC rings in shared memory (appliance._native) + eventfd doorbells
- socketpair.py  SocketpairLink: the same contract without native code (AF_UNIX stream, credits)
- sim.py         SimLink: deterministic, in-process, for tests and the simulator
- mesh.py        create_mesh (supervisor) / attach_mesh (worker): one link per worker pair
"""
