// Starts `ultrafast serve` for the node test suites (tests/e2e, tests/web): node built-ins only,
// so both packages import it by path. The server gets --host 127.0.0.1 --port 0 and is ready once
// it prints the port it listens on.
import { spawn } from 'node:child_process';
import { once } from 'node:events';

// args: everything after `serve` but the host and port. Resolves to {proc, port, base, stderr(),
// stop()}; stop() sends SIGTERM and resolves to the exit code.
export async function startServe(bin, args) {
  const proc = spawn(bin, ['serve', ...args, '--host', '127.0.0.1', '--port', '0'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const port = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${stderr}`)), 60000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited (${code}):\n${stderr}`)); });
  });
  return {
    proc, port, base: `http://127.0.0.1:${port}`,
    stderr: () => stderr,
    async stop() {
      proc.kill('SIGTERM');
      const [code] = await once(proc, 'exit');
      return code;
    },
  };
}
