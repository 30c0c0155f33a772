//! The filter's exports (its dispatch.rs, compiled into this binary by main.rs), as the host calls them.

extern "C" {
    pub(crate) fn _initialize();
    pub(crate) fn proxy_on_context_create(context_id: u32, root_id: u32);
    pub(crate) fn proxy_on_configure(root_id: u32, configuration_size: usize) -> u32;
    pub(crate) fn proxy_on_tick(root_id: u32);
    pub(crate) fn proxy_on_request_headers(context_id: u32, headers: usize, end_of_stream: u32) -> u32;
    pub(crate) fn proxy_on_response_headers(context_id: u32, headers: usize, end_of_stream: u32) -> u32;
    pub(crate) fn proxy_on_log(context_id: u32);
    pub(crate) fn proxy_on_delete(context_id: u32);
    pub(crate) fn proxy_on_memory_allocate(size: usize) -> *mut u8;
    pub(crate) fn proxy_on_http_call_response(root_id: u32, token: u32, headers: usize, body_size: usize, trailers: usize);
}
