from __future__ import annotations

from rest_framework.pagination import PageNumberPagination


class PortalPagination(PageNumberPagination):
    """Pages of 50 by default; `page_size` up to 200."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
