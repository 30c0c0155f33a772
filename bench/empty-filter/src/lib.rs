//! Does nothing on every request: what remains is the cost of running a V8 filter at all.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

struct Root;
struct Request;

impl Context for Root {}
impl RootContext for Root {
    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Request))
    }
    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
impl Context for Request {}
impl HttpContext for Request {}

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| Box::new(Root));
}}
