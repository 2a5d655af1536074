"""lich's provider plugins: ``openai_compat``, ``anthropic``, ``ollama`` and the ``failover`` router."""
