def write_vlmevalkit(*a, **k): raise NotImplementedError
