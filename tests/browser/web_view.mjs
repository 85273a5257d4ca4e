// fastmon's web view in a real headless browser (tests/test_web_view.py runs it from the
// folder where @sparticuz/chromium and puppeteer-core are installed): loads URL, reads
// the screen the app streams over the websocket, presses `?`, prints what it saw as JSON.
import chromium from "@sparticuz/chromium";
import puppeteer from "puppeteer-core";

const [url] = process.argv.slice(2);
const browser = await puppeteer.launch({
  args: chromium.args, executablePath: await chromium.executablePath(), headless: true,
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1500, height: 950 });
  const cdp = await page.createCDPSession();
  await cdp.send("Network.enable");
  let screen = "";
  cdp.on("Network.webSocketFrameReceived", ({ response }) => {
    const data = response.opcode === 2
      ? Buffer.from(response.payloadData, "base64").toString("utf8") : response.payloadData;
    screen += data.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "");  // the text, without its styles and moves
  });
  const until = async (predicate, ms) => {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (predicate()) return true;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    return predicate();
  };
  const steps = () => [...screen.matchAll(/step (\d[\d,]*)|of (\d[\d,]*) steps/g)]
    .map((m) => Number((m[1] || m[2]).replace(/,/g, "")));
  const most = () => Math.max(0, ...steps());
  const response = await page.goto(url, { waitUntil: "load" });
  const header = await until(() => screen.includes("elapsed") && most() > 0, 90000);
  const first = most();
  await until(() => most() > first, 30000);
  const later = most();
  await page.mouse.click(700, 450);  // the terminal takes the keys once focused
  await page.keyboard.press("?");
  const help = await until(() => screen.includes("fastmon — keys"), 30000);
  console.log(JSON.stringify({ status: response.status(), header, first, later, help }));
} finally {
  await browser.close();
}
