//! Does nothing on every request: what remains is the cost of running a V8 filter at all.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

struct EmptyRoot;
struct EmptyRequest;

impl Context for EmptyRoot {}
impl RootContext for EmptyRoot {
    fn create_http_context(&self, _: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(EmptyRequest))
    }
    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
impl Context for EmptyRequest {}
impl HttpContext for EmptyRequest {}

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| Box::new(EmptyRoot));
}}
