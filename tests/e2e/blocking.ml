(* blocking.ml — e2e program for wall-clock mode (FLAMME_MODE=wall): the main
   thread spends its time blocked in Unix.read ([reader]) on a pipe that a
   systhread ([writer]) feeds slowly with Unix.sleepf pauses, while a spawned
   domain computes ([spin]). Signals that land on blocked threads must not
   disturb the program (EINTR), and the blocked time must be attributed to
   the OCaml functions that blocked.
   Build: ocamlopt -I +unix -I +threads unix.cmxa threads.cmxa blocking.ml
   Usage: blocking.exe  (~1.5 s wall) *)

let[@inline never] spin n =
  let acc = ref 1 in
  for i = 1 to n do
    acc := (!acc * 1103515245 + i) land 0x3fffffff
  done;
  !acc

let[@inline never] writer w =
  for i = 1 to 25 do
    Unix.sleepf 0.05;
    ignore (Unix.write_substring w (Printf.sprintf "%02d" i) 0 2)
  done;
  Unix.close w

(* Reads until end of file; returns the number of bytes read. *)
let[@inline never] reader r =
  let buf = Bytes.create 2 and got = ref 0 in
  let rec loop () =
    let n = Unix.read r buf 0 2 in
    if n > 0 then begin got := !got + n; loop () end
  in
  loop ();
  !got

let () =
  let r, w = Unix.pipe () in
  let d = Domain.spawn (fun () -> spin 700_000_000) in
  let t = Thread.create writer w in
  let got = reader r in
  Thread.join t;
  let s = Domain.join d in
  Printf.printf "blocking: got=%d spin=%d\n" got s
