"""Authentication (SASL mechanisms, users) and, later, authorisation (ACLs) and TLS."""
