"""Generated gRPC/protobuf modules (agent_pb2, coordinator_pb2, ...). Built, never hand-edited."""
