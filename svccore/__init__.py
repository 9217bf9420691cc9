"""The Django-free pieces the service and the operator tool (``svcctl``) share:
identifiers, key files and the catalogue file. Both import from here; neither imports
the other's internals. (The token and signed-document codecs live in ``devices``,
which firmware vendors.)"""
