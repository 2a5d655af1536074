"""lich's provider plugins: ``openai_compat``, ``anthropic``, ``ollama``, and the
``failover`` router. Each module is one plugin (an entry point in the ``lich``
group); none is imported by the core.
"""
