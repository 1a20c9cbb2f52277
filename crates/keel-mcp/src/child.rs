//! A stdio server's process as an MCP transport: JSON-RPC over its standard input and output,
//! its output held to [`MAX_MESSAGE_BYTES`] a message ([`CappedLines`]), the process killed when
//! the transport closes or is dropped.

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use crate::capped::{CappedLines, MAX_MESSAGE_BYTES};

/// The transport over a running server process.
pub(crate) struct ChildTransport {
    /// Spawned with `kill_on_drop`: dropping the transport kills it.
    child: Child,
    transport: AsyncRwTransport<RoleClient, CappedLines<ChildStdout>, ChildStdin>,
}

impl ChildTransport {
    /// Spawns `command` with its standard input and output piped (and its standard error, for
    /// the caller to read); the transport and the standard error.
    pub(crate) fn spawn(
        mut command: tokio::process::Command,
    ) -> std::io::Result<(ChildTransport, Option<ChildStderr>)> {
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other(
                "the server's stdio could not be piped",
            ));
        };
        let stderr = child.stderr.take();
        let transport = AsyncRwTransport::new(CappedLines::new(stdout, MAX_MESSAGE_BYTES), stdin)
            // keel's own cap comes first; a line it passes is never over rmcp's.
            .with_max_line_length(MAX_MESSAGE_BYTES + 1024);
        Ok((ChildTransport { child, transport }, stderr))
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let closed = self.transport.close().await;
        // The server's session is over: it goes now, whatever it was doing.
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        closed
    }
}
