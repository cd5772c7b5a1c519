//! Counting a connection's requests in flight: a request counts from its call until its
//! response body is done or dropped, so that a connection is idle (and may be closed for
//! another) only when no caller is waiting on it.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;

use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use tower::Service;

use super::gate::Conn;

/// `inner`, counting its requests on `conn`.
#[derive(Clone)]
pub(super) struct Tracked<S> {
    pub(super) inner: S,
    pub(super) conn: Arc<Conn>,
}

/// One request in flight; ended when dropped.
struct Active(Arc<Conn>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.finish();
    }
}

type Boxed<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, R> Service<Request<B>> for Tracked<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    R: Body + Send + 'static,
{
    type Response = Response<Guarded<R>>;
    type Error = S::Error;
    type Future = Boxed<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.conn.start();
        let active = Active(Arc::clone(&self.conn));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await?;
            Ok(res.map(|body| Guarded {
                body,
                _active: active,
            }))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that ends its request's count when it is done or dropped.
    pub(super) struct Guarded<B> {
        #[pin]
        body: B,
        _active: Active,
    }
}

impl<B: Body> Body for Guarded<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
