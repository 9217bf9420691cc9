"""gunicorn settings of the tests' servers (``start_gunicorn`` in tests/conftest.py):
the application is imported once, by the master, and forked into its workers, so a
server costs one import of the service instead of one per worker. A signer on a
PKCS#11 token is loaded by each worker instead (a token's session does not survive a
fork): ``start_gunicorn(..., preload=False)``."""

preload_app = True


def pre_fork(server, worker):
    # The master's start-up checks read the database; its connection is closed before a
    # worker could inherit the socket.
    from django.db import connections

    connections.close_all()
