"""This machine and this checkout, below everything else: where things are kept (paths),
every local listener on loopback (loopback), and the pinned jars (jars, maven)."""
