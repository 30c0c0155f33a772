//! Generates the gRPC server code from proto/ (Fortio's ping service, our streaming service, the
//! gRPC health service).
//!
//! protox, a pure-Rust protobuf compiler, parses the .proto files into a FileDescriptorSet and
//! tonic-prost-build generates prost messages and tonic services from it: no system `protoc` is
//! needed, and the vendored .proto files stay the single source of the message layouts and method
//! paths that Fortio and grpcio call (hand-declared prost messages would have to repeat them).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos =
        ["proto/fgrpc/ping.proto", "proto/tailweight/emulator/v1/streamer.proto", "proto/grpc/health/v1/health.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_transport(false)
        // Tick.payload shares the backend's payload buffer instead of copying it per tick.
        .bytes(".tailweight.emulator.v1.Tick.payload")
        .compile_fds(descriptors)?;
    Ok(())
}
