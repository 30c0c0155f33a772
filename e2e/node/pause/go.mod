// The pod sandbox's process for the real-node probe (e2e/node): built by the project, never pulled.
module tailweight.local/e2e/node/pause

go 1.26.0
