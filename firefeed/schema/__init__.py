"""The data plane's DDL: company schemas, project and staging tables, columns, rules pass tables."""

from firefeed.schema.service import SchemaService

__all__ = ["SchemaService"]
