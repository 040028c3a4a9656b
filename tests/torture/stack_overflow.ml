(* stack_overflow.ml — Stack_overflow raised and caught in a loop on the main
   fiber, inside an effect handler's fiber and in another domain (run with a
   small OCAMLRUNPARAM=l=... so each overflow is quick).
   torture-libs: *)
type _ Effect.t += Ask : int Effect.t

let rec deep n = if n = 0 then 0 else 1 + deep (n - 1)

let overflow () =
  match deep max_int with _ -> 0 | exception Stack_overflow -> 1

let in_handler () =
  Effect.Deep.match_with
    (fun () -> Effect.perform Ask + overflow ())
    ()
    { retc = (fun v -> v);
      exnc = raise;
      effc = (fun (type a) (e : a Effect.t) ->
        match e with
        | Ask -> Some (fun (k : (a, _) Effect.Deep.continuation) -> Effect.Deep.continue k 0)
        | _ -> None) }

let () =
  let main = ref 0 and eff = ref 0 in
  for _ = 1 to 40 do
    main := !main + overflow ();
    eff := !eff + in_handler ()
  done;
  let d = Domain.spawn (fun () ->
    let c = ref 0 in for _ = 1 to 40 do c := !c + overflow () done; !c) in
  Printf.printf "caught: main %d, handler %d, domain %d\n" !main !eff (Domain.join d)
