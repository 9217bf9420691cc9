"""The Django-free pieces the service and the operator tool (``svcctl``) share:
identifiers, key files, the catalogue file, the claims of an air-gapped licence, the
licence file and the invoice CSV format. Both import from here; neither imports the
other's internals. (The token and signed-document codecs live in ``devices``, which
firmware vendors.)"""
