"""What crosses process boundaries: ids and records, the error hierarchy, the chunk grid
every side agrees on, and the messages. Imports no other dgvm module."""
