// Preloaded into a node MCP server (node --require loopback.cjs ...): every server it
// starts listens on 127.0.0.1 only (the reference servers listen on every interface),
// on the port the test chose, and its port is printed once listening.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || typeof args[0] === "string") {
    const port = Number(args[0]);
    const rest = args.slice(1).filter((a) => typeof a === "function");
    this.once("listening", () => console.error(`LOOPBACK_PORT ${this.address().port}`));
    return listen.call(this, port, "127.0.0.1", ...rest);
  }
  return listen.apply(this, args);
};
