"""API plumbing shared by every app's /v1 views: the two kinds of view (:mod:`.views`),
request fields (:mod:`.fields`), the JSON parser and renderer, the OpenAPI schema's shared
parts (:mod:`.schema`), path converters and keyset paging."""
