(* tests/unwind/perfdeep.ml — a fiber that performs in a tight loop from
   DEPTH frames deep (a parser or an interpreter run inside an Eio-style
   fiber), its handler continuing at once: a fifth to a third of the
   samples land in the runtime's stack switches (caml_perform, caml_resume),
   some in their few-instruction windows, where the domain state already
   names the stack being switched to.
   Usage: perfdeep.exe [SCALE] [DEPTH] *)

open Effect
open Effect.Deep

type _ Effect.t += Tick : int -> int Effect.t

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let depth = if Array.length Sys.argv > 2 then int_of_string Sys.argv.(2) else 3000
let rounds = max 1 (int_of_float (scale *. 60_000_000.))

let[@inline never] rec ticks n acc = if n = 0 then acc else ticks (n - 1) (perform (Tick acc))

(* Non-tail: every level keeps its frame while the loop runs at the bottom. *)
let[@inline never] rec down d = if d = 0 then ticks rounds 1 else (down (d - 1) + d) land 0xffffff

let () =
  let r =
    try_with down depth
      { effc = (fun (type a) (e : a Effect.t) ->
          match e with
          | Tick x -> Some (fun (k : (a, _) continuation) -> continue k ((x * 31 + 7) land 0xffff))
          | _ -> None) }
  in
  Printf.printf "perfdeep: %d\n" r
