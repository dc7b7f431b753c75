"""Capacity tasks: the only code that talks to EC2 and SageMaker about offerings, purchases and reservations."""
