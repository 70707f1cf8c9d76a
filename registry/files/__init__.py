"""Files: uploaded assets (`file_...`) that sessions mount as resources; bytes live in Django's storage."""
