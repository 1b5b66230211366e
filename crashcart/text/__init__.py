"""(docstring to write)"""
