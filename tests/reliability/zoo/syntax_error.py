"""Not valid Python."""

def lich_register_tools(registry)
    return None
